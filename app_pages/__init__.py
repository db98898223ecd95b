"""The Streamlit app's pages (one file per page) and the small helpers they share.

Pages call the same typed functions as the `tripath` CLI (simulator.runner, calibrate.inspect,
planning.*): no simulation logic lives here, only widgets, tables and figures.
"""
