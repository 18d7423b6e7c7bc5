"""How the conversation behaves: turn-taking figures from the aligned two-channel timeline
(docs/metrics.md "Conversation behaviour")."""
