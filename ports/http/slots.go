package httpport

import (
	"context"
	"sync"
)

// fairSlots shares the slots of the idempotent writes (acquire, which
// waits), or of the exports (try, which does not), among merchants: at
// most total run at once, and at most perMerchant of them for one merchant,
// so that a merchant whose writes are slow (or stuck until their statement
// timeout) leaves the other slots to the others. A freed slot goes to the
// waiting write of the merchant that holds the fewest, the earliest of
// those first; a write is never let in ahead of an earlier one of its own
// merchant.
type fairSlots struct {
	total, perMerchant int

	mu      sync.Mutex
	held    int
	holding map[string]int // slots held per merchant
	queue   []*slotWaiter  // in arrival order
}

type slotWaiter struct {
	merchant string
	granted  chan struct{} // closed when the slot is the waiter's
}

func newFairSlots(total, perMerchant int) *fairSlots {
	return &fairSlots{total: total, perMerchant: min(perMerchant, total), holding: map[string]int{}}
}

// acquire takes a slot for the merchant, waiting for one until ctx ends;
// release gives it back.
func (s *fairSlots) acquire(ctx context.Context, merchant string) (release func(), err error) {
	w := &slotWaiter{merchant: merchant, granted: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, w)
	s.grant()
	s.mu.Unlock()
	release = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.held--
		if s.holding[merchant]--; s.holding[merchant] == 0 {
			delete(s.holding, merchant)
		}
		s.grant()
	}
	select {
	case <-w.granted:
		return release, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-w.granted: // granted meanwhile: give it on
		s.mu.Unlock()
		release()
	default:
		for i, q := range s.queue {
			if q == w {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
	}
	return nil, ctx.Err()
}

// waiting is how many writes wait for a slot.
func (s *fairSlots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// grant hands free slots to waiters, each to the first waiter of the
// merchant that holds the fewest slots (below perMerchant); s.mu is held.
func (s *fairSlots) grant() {
	for s.held < s.total && len(s.queue) > 0 {
		best := -1
		seen := map[string]bool{}
		for i, w := range s.queue {
			if seen[w.merchant] {
				continue // only a merchant's first waiter may go
			}
			seen[w.merchant] = true
			n := s.holding[w.merchant]
			if n < s.perMerchant && (best < 0 || n < s.holding[s.queue[best].merchant]) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		w := s.queue[best]
		s.queue = append(s.queue[:best], s.queue[best+1:]...)
		s.held++
		s.holding[w.merchant]++
		close(w.granted)
	}
}

// try takes a slot for the merchant only if one is free at once (a free
// slot beside waiters is one their merchants' shares keep from them):
// release gives it back. Otherwise it takes nothing and says which cap
// refused it: refusedMerchant when the merchant holds its share,
// refusedInstance when every slot is held.
func (s *fairSlots) try(merchant string) (release func(), refused slotRefusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.holding[merchant] >= s.perMerchant:
		return nil, refusedMerchant
	case s.held >= s.total:
		return nil, refusedInstance
	}
	s.held++
	s.holding[merchant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.held--
			if s.holding[merchant]--; s.holding[merchant] == 0 {
				delete(s.holding, merchant)
			}
			s.grant()
		})
	}, 0
}

// slotRefusal is why try took no slot.
type slotRefusal int

const (
	refusedMerchant slotRefusal = iota + 1 // the merchant holds its share
	refusedInstance                        // every slot is held
)
