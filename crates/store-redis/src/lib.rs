//! The canonical invocation store on Redis and Redis Cluster: two round trips per invocation.
