"""Reports: the terminal (rich) and, later, one self-contained HTML file."""
