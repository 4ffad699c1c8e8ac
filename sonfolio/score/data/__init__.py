"""score track: data"""
