package lockertest

import (
	"sync"

	"github.com/bext-dev/bext-scheduler/locking"
)

// The counting lease of a concurrency group (locking.TryLockSlot): k
// slots, each a lock of the contract.
var slotCases = []testCase{
	{"Slots/AtMostK", caseSlotsAtMostK},
	{"Slots/DeadHolderFrees", caseSlotsDeadHolder},
	{"Slots/Race", caseSlotsRace},
	{"Slots/BadInput", caseSlotsBadInput},
}

func (s *suite) mustSlot(l locking.Locker, group string, k, first int, who string) (*locking.Handle, int) {
	s.t.Helper()
	h, i, err := locking.TryLockSlot(s.ctx, l, group, k, first, longTTL)
	if err != nil || h == nil || i < 0 || i >= k {
		s.t.Fatalf("%s: TryLockSlot(%d slots) = %v, %d, %v; want a slot", who, k, h, i, err)
	}
	return h, i
}

func (s *suite) mustFull(l locking.Locker, group string, k int, who string) {
	s.t.Helper()
	for first := range k {
		h, i, err := locking.TryLockSlot(s.ctx, l, group, k, first, longTTL)
		if err != nil || h != nil || i != -1 {
			s.t.Fatalf("%s: TryLockSlot of a full group (from slot %d) = %v, %d, %v; want nil, -1, nil", who, first, h, i, err)
		}
	}
}

// k holders get k distinct slots; the next finds the group full, with no
// error, whatever slot it tries first; a release frees exactly that slot,
// which the next holder gets with a higher fence; renewals keep a slot.
func caseSlotsAtMostK(s *suite) {
	const k = 3
	g := s.key("group")
	type holder struct {
		l locking.Locker
		h *locking.Handle
	}
	held := map[int]holder{}
	for range k {
		l := s.locker()
		h, i := s.mustSlot(l, g, k, 0, "a holder")
		if _, dup := held[i]; dup {
			s.t.Fatalf("slot %d given twice", i)
		}
		held[i] = holder{l, h}
	}
	d := s.locker()
	s.mustFull(d, g, k, "a fourth node")
	s.mustRenew(held[0].l, held[0].h, "the holder of slot 0")
	s.mustRelease(held[1].l, held[1].h, "the holder of slot 1")
	h, i := s.mustSlot(d, g, k, 2, "the fourth node after slot 1's release")
	if i != 1 {
		s.t.Fatalf("the fourth node got slot %d, want 1 (the one released)", i)
	}
	if h.Fence() <= held[1].h.Fence() {
		s.t.Fatalf("slot 1's fence %d after %d: want it to increase", h.Fence(), held[1].h.Fence())
	}
	s.mustFull(s.locker(), g, k, "a fifth node")
	// Another group is another count.
	s.mustSlot(s.locker(), g+"-other", 1, 0, "a node in another group")
}

// A holder that dies (its lock lapses as this backend's do) frees its
// slot for another node.
func caseSlotsDeadHolder(s *suite) {
	const k = 2
	g := s.key("group")
	a, b, c := s.locker(), s.locker(), s.locker()
	_, ia := s.mustSlot(a, g, k, 0, "A")
	s.mustSlot(b, g, k, 0, "B")
	s.mustFull(c, g, k, "C while A and B hold")
	s.b.Expire(s.t, locking.SlotKey(g, ia))
	_, ic := s.mustSlot(c, g, k, 0, "C after A's slot lapsed")
	if ic != ia {
		s.t.Fatalf("C got slot %d, want A's %d", ic, ia)
	}
	// (B's slot is not checked: Expire may lapse every lock of the case.)
}

// Many nodes racing for k slots: exactly k win, each a slot of its own.
func caseSlotsRace(s *suite) {
	const k, n = 4, 24
	g := s.key("group")
	lockers := make([]locking.Locker, n)
	for i := range lockers {
		lockers[i] = s.locker()
	}
	var (
		mu   sync.Mutex
		wins = map[int]int{}
		wg   sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			h, slot, err := locking.TryLockSlot(s.ctx, lockers[i], g, k, i, longTTL)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				s.t.Errorf("node %d: %v", i, err)
				return
			}
			if h != nil {
				wins[slot]++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(wins) != k {
		s.t.Fatalf("%d of %d slots taken by %d racing nodes: %v", len(wins), k, n, wins)
	}
	for slot, w := range wins {
		if w != 1 {
			s.t.Fatalf("slot %d taken %d times", slot, w)
		}
	}
}

// A count out of range or a group name no key may hold is ErrInvalid,
// never a panic or a slot.
func caseSlotsBadInput(s *suite) {
	a := s.locker()
	for _, k := range []int{0, -1, locking.MaxSlots + 1} {
		h, i, err := locking.TryLockSlot(s.ctx, a, s.key("g"), k, 0, longTTL)
		if h != nil || i != -1 {
			s.t.Fatalf("%d slots: a slot %d", k, i)
		}
		s.wantErrIs(err, locking.ErrInvalid, "TryLockSlot with a bad count")
	}
	h, _, err := locking.TryLockSlot(s.ctx, a, "bad\x01group", 2, 0, longTTL)
	if h != nil {
		s.t.Fatal("a group name with a control character got a slot")
	}
	s.wantErrIs(err, locking.ErrInvalid, "TryLockSlot with a control character in the group")
}
