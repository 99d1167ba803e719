"""Where a replay's Spark runs: sessions (classic and Spark Connect), making restream_kit
importable on a remote cluster's workers, and the driver JVM's class-data-sharing archive."""
