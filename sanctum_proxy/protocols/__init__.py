"""The client protocols, pure: the chat request as read, and the others translated to and from the chat round loop."""
