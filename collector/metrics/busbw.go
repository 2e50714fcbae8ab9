package metrics

// BusBandwidth returns the bus bandwidth in bytes per second of one
// collective, nccl-tests convention, from the per-rank buffer bytes
// S = count × sizeof(dtype) over nranks ranks that took seconds:
// AllReduce S·2(n−1)/n; AllGather and ReduceScatter S·(n−1) (their count is
// the per-rank shard); Broadcast, Reduce, Send, Recv S. Unknown operations
// and non-positive durations give 0.
func BusBandwidth(op string, bytes uint64, nranks int, seconds float64) float64 {
	if seconds <= 0 || nranks <= 0 {
		return 0
	}
	s, n := float64(bytes), float64(nranks)
	var moved float64
	switch op {
	case "AllReduce":
		moved = s * 2 * (n - 1) / n
	case "AllGather", "ReduceScatter":
		moved = s * (n - 1)
	case "Broadcast", "Reduce", "Send", "Recv":
		moved = s
	default:
		return 0
	}
	return moved / seconds
}
