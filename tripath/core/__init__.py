"""What every part of tripath may import: input errors, request and record types, metrics over
records, the shipped data folders, atomic file writes and the speculative-decoding math.
"""
