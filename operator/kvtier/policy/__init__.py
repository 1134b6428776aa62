"""Pure decisions from (KVCacheTier spec, KVCachePolicy, cluster facts); no API I/O here."""
