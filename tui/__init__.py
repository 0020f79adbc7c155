"""The Textual dashboard: live engines, replays and operator controls."""
