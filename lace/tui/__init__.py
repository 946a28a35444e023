"""The Textual app: switch between agent threads, watch them work, talk to them, see the board."""
