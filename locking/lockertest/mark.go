package lockertest

import (
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Reading a mark (locking.MarkReader) decides nothing: a key without a
// mark reads as missing and stays so (a later tick is still granted);
// InitMarks and a granted tick show as stored; a read never takes the
// lock or moves the mark.
func caseMarkRead(s *suite) {
	a := s.locker()
	mr, ok := a.(locking.MarkReader)
	if !ok {
		s.t.Fatalf("%T does not implement locking.MarkReader: every backend must (locking/mark.go)", a)
	}
	k := s.key("k")
	if m, ok, err := mr.Mark(s.ctx, k); err != nil || ok {
		s.t.Fatalf("Mark of a fresh key = %v, %v, %v; want missing", m, ok, err)
	}
	before := s.onTime()
	if err := s.ticker(a).InitMarks(s.ctx, []string{k}); err != nil {
		s.t.Fatalf("InitMarks = %v", err)
	}
	m, ok, err := mr.Mark(s.ctx, k)
	if err != nil || !ok || m.Before(before.Add(-clockSlack)) || m.After(s.now().Add(clockSlack)) {
		s.t.Errorf("Mark after InitMarks = %v, %v, %v; want about the backend's time %v", m, ok, err, before)
	}
	t1 := s.onTime().Add(time.Second)
	h := s.grant(a, s.tickReq(k, t1), "locker A at now+1s")
	if m, ok, err := mr.Mark(s.ctx, k); err != nil || !ok || !m.Equal(t1) {
		s.t.Errorf("Mark after a grant of %v = %v, %v, %v; want the granted tick", t1, m, ok, err)
	}
	s.mustRelease(a, h, "locker A")
	// Reads took nothing: the next tick is granted.
	h = s.grant(a, s.tickReq(k, t1.Add(time.Second)), "locker A at now+2s after reading the mark")
	s.mustRelease(a, h, "locker A")
	if _, _, err := mr.Mark(s.ctx, ""); err == nil {
		s.t.Error("Mark of an empty key: nil error, want ErrInvalid")
	}
}
