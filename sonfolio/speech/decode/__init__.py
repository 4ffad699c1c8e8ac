"""speech track: decode"""
