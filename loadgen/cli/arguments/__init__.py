"""Command-line arguments several commands share, resolved and checked the same way in each; no command here."""
