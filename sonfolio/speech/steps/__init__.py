"""speech track: steps"""
