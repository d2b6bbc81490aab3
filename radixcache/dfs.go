package radixcache

import (
	"cmp"
	"slices"
)

// DFSWeightOrder orders requests as SGLang's dfs-weight schedule policy
// does (_dfs_weight_order in mem_cache/base_prefix_cache.py). Each request
// is given by the node where its cached prefix ends, as Match returns it;
// a node's weight is the number of requests that end in its subtree. A
// depth-first walk from the root visits a node's children heaviest first,
// ties in the order their first pages were added under it (a Python
// dict's order), and after them lists the requests that end at the node,
// in the order given: the requests with nothing cached, at the root, come
// last. It returns the indices into nodes in that order. A node that is
// not live in the tree counts as the root.
func (t *Tree[V]) DFSWeightOrder(nodes []*Node[V]) []int {
	ending := make(map[*Node[V]][]int, len(nodes))
	weight := make(map[*Node[V]]int)
	// children holds, for each node on a request's path, its children on
	// such paths: the others weigh nothing and list nobody.
	children := make(map[*Node[V]][]*Node[V])
	for i, n := range nodes {
		if t.check(n) != nil {
			n = t.root
		}
		ending[n] = append(ending[n], i)
		for x := n; x != t.root; x = x.parent {
			if weight[x] == 0 {
				children[x.parent] = append(children[x.parent], x)
			}
			weight[x]++
		}
	}
	order := make([]int, 0, len(nodes))
	var visit func(n *Node[V])
	visit = func(n *Node[V]) {
		kids := children[n]
		slices.SortFunc(kids, func(a, b *Node[V]) int {
			if c := cmp.Compare(weight[b], weight[a]); c != 0 {
				return c
			}
			return cmp.Compare(a.order, b.order)
		})
		for _, c := range kids {
			visit(c)
		}
		order = append(order, ending[n]...)
	}
	visit(t.root)
	return order
}
