"""score track: eval"""
