"""speech track: model"""
