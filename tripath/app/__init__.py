"""The Streamlit app (``app.py`` at the repository root runs it).

``pages`` holds one file per page; ``widgets`` the forms, tables and charts they share. Pages call
the same typed functions as the CLI: no simulation logic lives here.
"""
