"""Forms, tables and charts the app's pages share."""
