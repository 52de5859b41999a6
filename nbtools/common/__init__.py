"""Used by every room; imports none of them."""
