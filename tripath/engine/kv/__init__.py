"""KV storage and attention over it: the paged block pool (with automatic prefix caching), the dense reference
cache, and the compressed (INT8 / INT4 / mixed) store with its quality and cost meters.
"""
