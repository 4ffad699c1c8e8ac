"""speech track: eval"""
