"""What every part of tripath may import: input errors, request and record types, metrics over
records, the shipped data folders, atomic file writes, the speculative-decoding math and prefix caching's
block hashes and allocator policy.
"""
