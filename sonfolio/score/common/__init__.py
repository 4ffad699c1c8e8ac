"""score track: common"""
