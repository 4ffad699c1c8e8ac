"""score track: model"""
