"""One Streamlit page per file; app.py lists them in its navigation."""
