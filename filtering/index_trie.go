package filtering

import (
	"strings"
)

// tnode is a node of the type-pattern trie: one edge per pattern segment,
// a separate edge for a "*" segment. exact holds patterns that end at the
// node, tail holds patterns whose trailing ".*" follows it. Nodes are
// immutable once published; writers copy the path they change.
type tnode struct {
	children pmap[*tnode]
	star     *tnode
	exact    list[posting]
	tail     list[posting]
}

// posting is one pattern of one subscription: pat indexes the filter's
// types, so that a subscription with several matching patterns is reported
// once (by its first matching pattern).
type posting struct {
	e   *entry
	pat int
}

func (n *tnode) empty() bool {
	return n.children.Len() == 0 && n.star == nil && len(n.exact.items) == 0 && len(n.tail.items) == 0
}

// with returns a copy of the trie rooted at n (nil: empty) with p added at
// the end of segs, as exact or tail.
func (n *tnode) with(segs []string, tail bool, p posting) *tnode {
	var c tnode
	if n != nil {
		c = *n
	}
	if len(segs) == 0 {
		if tail {
			c.tail = c.tail.with(p)
		} else {
			c.exact = c.exact.with(p)
		}
		return &c
	}
	if segs[0] == "*" {
		c.star = c.star.with(segs[1:], tail, p)
		return &c
	}
	child, _ := c.children.get(segs[0])
	c.children = c.children.set(segs[0], child.with(segs[1:], tail, p))
	return &c
}

// without returns a copy of the trie where one posting at segs, of an
// entry the caller has stamped as gone, is removed; nil when the trie
// becomes empty.
func (n *tnode) without(segs []string, tail bool) *tnode {
	if n == nil {
		return nil
	}
	c := *n
	switch {
	case len(segs) == 0 && tail:
		c.tail = c.tail.without()
	case len(segs) == 0:
		c.exact = c.exact.without()
	case segs[0] == "*":
		c.star = c.star.without(segs[1:], tail)
	default:
		child, _ := c.children.get(segs[0])
		if child = child.without(segs[1:], tail); child == nil {
			c.children = c.children.del(segs[0])
		} else {
			c.children = c.children.set(segs[0], child)
		}
	}
	if c.empty() {
		return nil
	}
	return &c
}

// walk visits every pattern that matches the type t, whose segment starting
// at start is to be consumed from node n. It never allocates.
func (n *tnode) walk(t string, start int, c *matchCtx) {
	end := strings.IndexByte(t[start:], '.')
	if end < 0 {
		end = len(t)
	} else {
		end += start
	}
	seg := t[start:end]
	if next, _ := n.children.get(seg); next != nil {
		next.reached(t, end, c)
	}
	if n.star != nil && seg != "" {
		n.star.reached(t, end, c)
	}
}

// reached handles node n after consuming the segment ending at end.
func (n *tnode) reached(t string, end int, c *matchCtx) {
	if end == len(t) {
		c.emitPostings(n.exact)
		return
	}
	// t[end] == '.': a trailing ".*" needs at least one more byte.
	if end+1 < len(t) {
		c.emitPostings(n.tail)
	}
	n.walk(t, end+1, c)
}
