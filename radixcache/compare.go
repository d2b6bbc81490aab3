package radixcache

import (
	"bytes"
	"unsafe"
)

// compareBlock is how many tokens commonPrefix compares per bytes.Equal call
// once it knows the sequences differ: large enough that call overhead is
// noise, small enough that the final token-by-token scan is short.
const compareBlock = 1024

// commonPrefix returns the length of the longest common prefix of a and b,
// floored to the tree's page size.
func (t *Tree[V]) commonPrefix(a, b []int32) int {
	n := commonPrefix(a, b)
	return n - n%t.pageSize
}

// commonPrefix returns the length of the longest common prefix of a and b.
//
// Matching a long cached prompt is the radix tree's hot path (a 200k-token
// prompt is 800 KB of ids), and a plain Go loop runs at a fraction of memory
// bandwidth. bytes.Equal compares with vector instructions, so the token
// slices are viewed as bytes: equality of two int32 runs is equality of their
// bytes, whatever the byte order. The common case, a node matched to its end,
// is one call.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	a, b = a[:n], b[:n]
	if bytes.Equal(asBytes(a), asBytes(b)) {
		return n
	}
	i := 0
	for i+compareBlock <= n && bytes.Equal(asBytes(a[i:i+compareBlock]), asBytes(b[i:i+compareBlock])) {
		i += compareBlock
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// asBytes views s as its underlying bytes without copying.
func asBytes(s []int32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}
