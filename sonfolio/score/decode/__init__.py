"""score track: decode"""
