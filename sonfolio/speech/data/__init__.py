"""speech track: data"""
