"""score track: steps"""
