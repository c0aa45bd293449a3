"""Server-side strategies, the aggregation maths and the wire accounting they share with clients."""
