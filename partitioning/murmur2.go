package partitioning

// Murmur2 is the 32-bit murmur2 hash exactly as Kafka's Java client computes
// it (org.apache.kafka.common.utils.Utils.murmur2, seed 0x9747b28c), so that
// the gateway, Java producers and franz-go's StickyKeyPartitioner place a key
// on the same partition.
func Murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for len(data) >= 4 {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// Partition returns the partition Kafka's default partitioner chooses for a
// non-empty key among n partitions: toPositive(murmur2(key)) % n. It returns
// -1 when n is not positive.
func Partition(key []byte, n int32) int32 {
	if n <= 0 {
		return -1
	}
	return int32(Murmur2(key)&0x7fffffff) % n
}
