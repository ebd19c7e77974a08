package sim

import "testing"

// A request can have two polls on one life at once: the poll started for
// it and a hand-over of it (handOver), or two hand-overs. A token names one
// take: the backend answers a take carrying a token it knows from its
// record of that take (cluster.Store.TakeRequest: the same lock and fence;
// a backfill's record is kept after its taker was heard). The agent draws
// each take's token at random (locking.NewToken), so none repeats; nor may
// the harness's (seed 603428: a hand-over drew the token with which
// another poll of the request on the same life had taken a backfill a
// second before, the backend answered it with that take, and the harness
// ran the backfill a second time under the same fence).
func TestTakeTokensOfPollsOfOneRequestOnOneLifeDiffer(t *testing.T) {
	c := &cluster{plan: newPlan(603428)}
	l := &lifeState{node: "node-1", life: 0}
	seen := map[string]int{}
	for poll := range 3 {
		draw := c.takeTokens(l, "trigger-3", poll)
		for range 40 {
			token := draw()
			if p, ok := seen[token]; ok {
				t.Fatalf("poll %d drew token %s, a take of poll %d's", poll, token, p)
			}
			seen[token] = poll
		}
	}
}
