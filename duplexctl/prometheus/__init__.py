"""Server metrics beside the client's figures: scrape Prometheus ``/metrics`` during a run
(``load``, ``replay``, ``probe``), keep every sample, summarise them on the run's clock
(docs/metrics.md "Server metrics").

Below the commands and beside ``report``: it imports nothing of duplexctl's but ``errors``,
so ``duplexctl report`` re-renders the summaries without the client or the server.
"""
