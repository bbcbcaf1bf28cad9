package filtering

import (
	"strings"
)

// tnode is a node of the type-pattern trie: one edge per pattern segment,
// a separate edge for a "*" segment. exact holds patterns that end at the
// node, tail holds patterns whose trailing ".*" follows it. Nodes are
// immutable once published; writers copy the path they change.
type tnode struct {
	children map[string]*tnode
	star     *tnode
	exact    []posting
	tail     []posting
}

// posting is one pattern of one subscription: pat indexes the filter's
// types, so that a subscription with several matching patterns is reported
// once (by its first matching pattern).
type posting struct {
	e   *entry
	pat int
}

func (n *tnode) empty() bool {
	return len(n.children) == 0 && n.star == nil && len(n.exact) == 0 && len(n.tail) == 0
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
			c.tail = append(c.tail, p)
		} else {
			c.exact = append(c.exact, p)
		}
		return &c
	}
	if segs[0] == "*" {
		c.star = c.star.with(segs[1:], tail, p)
		return &c
	}
	m := make(map[string]*tnode, len(c.children)+1)
	for k, v := range c.children {
		m[k] = v
	}
	m[segs[0]] = c.children[segs[0]].with(segs[1:], tail, p)
	c.children = m
	return &c
}

// without returns a copy of the trie with every posting of e at segs
// removed; nil when the trie becomes empty.
func (n *tnode) without(segs []string, tail bool, e *entry) *tnode {
	if n == nil {
		return nil
	}
	c := *n
	switch {
	case len(segs) == 0 && tail:
		c.tail = removePosting(c.tail, e)
	case len(segs) == 0:
		c.exact = removePosting(c.exact, e)
	case segs[0] == "*":
		c.star = c.star.without(segs[1:], tail, e)
	default:
		child := c.children[segs[0]].without(segs[1:], tail, e)
		m := make(map[string]*tnode, len(c.children))
		for k, v := range c.children {
			m[k] = v
		}
		if child == nil {
			delete(m, segs[0])
		} else {
			m[segs[0]] = child
		}
		if len(m) == 0 {
			m = nil
		}
		c.children = m
	}
	if c.empty() {
		return nil
	}
	return &c
}

func removePosting(list []posting, e *entry) []posting {
	var out []posting
	for _, p := range list {
		if p.e != e {
			out = append(out, p)
		}
	}
	return out
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
	if next := n.children[seg]; next != nil {
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
