"""Widgets of the chat app. They render engine events and never touch a model."""
