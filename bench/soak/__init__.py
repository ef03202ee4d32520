"""The compressed soak of bench/soak.sh (Python 3 standard library only)."""
