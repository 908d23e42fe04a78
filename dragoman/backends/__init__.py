"""Things that answer chats: local models and upstream servers, behind one protocol."""
