"""Merge-on-read silver table: its layout, its current read, the fold of its changes into its snapshot."""
