package transport

// FailPoller makes the Hub's poller fail as if epoll_wait had (see
// netpoll.Poller.Fail); false when no poller runs.
func (h *Hub) FailPoller(err error) bool {
	h.pmu.Lock()
	ps := h.pset
	h.pmu.Unlock()
	if ps == nil {
		return false
	}
	ps.p.Fail(err)
	return true
}

// OutAllocated is the slots the outbound queue's ring holds now.
func (c *Conn) OutAllocated() int { return c.out.Allocated() }
