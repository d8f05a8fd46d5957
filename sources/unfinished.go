package sources

// unfinished is a doubly linked list of the messages a source read and has
// not finished yet, in the order it read them, so the first of them is where
// the source may commit, or a resumed replay starts. Pushing and removing are
// O(1) and allocate nothing: the caller's node type N embeds the links
// (unfinishedLinks) and returns them from its links method, so a node can sit
// in the caller's own per-message struct. The zero value is an empty list.
// unfinished is not safe for concurrent use; its owner guards it.
type unfinished[N any, P interface {
	*N
	links() *unfinishedLinks[N]
}] struct {
	first, last *N
	len         int
}

// unfinishedLinks are a node's neighbours in an unfinished list.
type unfinishedLinks[N any] struct {
	prev, next *N
}

// push appends n, which is in no list, at the end.
func (l *unfinished[N, P]) push(n *N) {
	ln := P(n).links()
	ln.prev, ln.next = l.last, nil
	if l.last != nil {
		P(l.last).links().next = n
	} else {
		l.first = n
	}
	l.last = n
	l.len++
}

// remove takes n, which is in l, out of l.
func (l *unfinished[N, P]) remove(n *N) {
	ln := P(n).links()
	if ln.prev != nil {
		P(ln.prev).links().next = ln.next
	} else {
		l.first = ln.next
	}
	if ln.next != nil {
		P(ln.next).links().prev = ln.prev
	} else {
		l.last = ln.prev
	}
	ln.prev, ln.next = nil, nil
	l.len--
}

// next returns the node after n in its list, or nil.
func (l *unfinished[N, P]) next(n *N) *N { return P(n).links().next }
