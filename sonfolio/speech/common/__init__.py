"""speech track: common"""
