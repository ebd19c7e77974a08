package pg

import (
	"crypto/sha256"
	"encoding/binary"
)

// lockID derives the 64-bit advisory lock id of key in namespace: the first
// 8 bytes (big-endian) of SHA-256(namespace, NUL, key). hashtext would give
// only 32 bits; 64 make collisions (which only add contention) negligible.
// The NUL keeps ("a", "bc") and ("ab", "c") apart. idExpr computes the same.
func lockID(namespace, key string) int64 {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return int64(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]))
}

// splitID gives the (classid, objid) pair under which pg_locks shows a
// bigint advisory lock (with objsubid 1): the high and low 32 bits.
func splitID(id int64) (hi, lo int64) {
	u := uint64(id)
	return int64(u >> 32), int64(u & 0xffffffff)
}

// probeClass is the first half of the two-int advisory keys this package
// uses for itself (objsubid 2, a space apart from the bigint keys of locks):
// (probeClass, backend pid) for the pooler probe, (probeClass, 0) to
// serialise table creation. It spells "bext".
const probeClass = 0x62657874

const (
	// tableExistsSQL avoids CREATE TABLE when the table is there, so a role
	// without CREATE privilege works once an operator made the table.
	tableExistsSQL = `SELECT to_regclass('bext_lock_fences') IS NOT NULL AND EXISTS (
  SELECT 1 FROM pg_attribute
  WHERE attrelid = to_regclass('bext_lock_fences') AND attname = 'claimed_until' AND NOT attisdropped)`

	// createTableSQL runs under a transaction-level advisory lock so two
	// nodes creating the table at once do not race into a unique_violation
	// on pg_type. It is sent as one simple-protocol message.
	createTableSQL = `BEGIN;
SELECT pg_advisory_xact_lock(1650817140, 0);
CREATE TABLE IF NOT EXISTS bext_lock_fences (
    namespace   text        NOT NULL,
    key         text        NOT NULL,
    fence       bigint      NOT NULL,
    holder      text,
    acquired_at timestamptz,
    PRIMARY KEY (namespace, key)
);
ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS claimed_until timestamptz;
COMMIT;`

	// tryLockSQL takes the advisory lock and, only when it won, bumps the
	// key's fencing token, in one round trip. The CTE l calls a volatile
	// function, so Postgres evaluates it exactly once, before the INSERT that
	// reads it. pg_backend_pid() lets the caller check the statement ran on
	// the session's own backend (a transaction pooler would move it).
	//
	// A fence is at least the database clock in microseconds, and above the
	// last one: so it stays strictly increasing even when a crash forgets
	// the last fence writes (sessions commit them asynchronously, see
	// doc.go), as long as the database clock does not step back.
	//
	// A key still claimed (Claim: a holder that died within its tick's
	// clock-skew claim) answers claimed = true: the caller then unlocks and
	// reports contention, and no fence is drawn.
	tryLockSQL = `WITH l AS (SELECT pg_try_advisory_lock($1::bigint) AS ok),
c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us),
cl AS (SELECT EXISTS (SELECT 1 FROM bext_lock_fences
  WHERE namespace = $2::text AND key = $3::text AND claimed_until > clock_timestamp()) AS claimed),
f AS (
  INSERT INTO bext_lock_fences AS t (namespace, key, fence, holder, acquired_at)
  SELECT $2::text, $3::text, greatest(1, c.us), $4::text, now() FROM l, c, cl WHERE l.ok AND NOT cl.claimed
  ON CONFLICT (namespace, key) DO UPDATE
    SET fence = greatest(t.fence + 1, excluded.fence), holder = excluded.holder, acquired_at = excluded.acquired_at
  RETURNING t.fence)
SELECT l.ok, cl.claimed, (SELECT fence FROM f), pg_backend_pid() FROM l, cl`

	// claimSQL keeps a key claimed for $3 microseconds from now, for the
	// acquisition with fence $4 only.
	claimSQL = `UPDATE bext_lock_fences SET claimed_until = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE namespace = $1::text AND key = $2::text AND fence = $4::bigint`

	// renewSQL proves the session is alive and its backend still holds the
	// lock.
	renewSQL = `SELECT pg_backend_pid(), EXISTS (
  SELECT 1 FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
    AND classid::bigint = $1::bigint AND objid::bigint = $2::bigint AND objsubid = 1)`

	releaseSQL = `SELECT pg_advisory_unlock($1::bigint)`

	// idExpr is lockID in SQL over the columns namespace and key, for List.
	idExpr = `('x' || encode(substr(sha256(convert_to(namespace, 'UTF8') || '\x00'::bytea || convert_to(key, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint`

	// listSQL joins the granted bigint advisory locks of this database with
	// the namespace's fence rows by derived id.
	listSQL = `WITH f AS (
  SELECT key, fence, coalesce(holder, '') AS holder, ` + idExpr + ` AS id
  FROM bext_lock_fences WHERE namespace = $1::text)
SELECT f.key, f.fence, f.holder FROM f
JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = (f.id >> 32) & 4294967295
  AND l.objid::bigint = f.id & 4294967295
ORDER BY f.key`

	probeLockSQL  = `SELECT pg_backend_pid(), pg_try_advisory_lock(1650817140, pg_backend_pid())`
	probeCheckSQL = `SELECT pg_backend_pid(), EXISTS (
  SELECT 1 FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
    AND classid = 1650817140 AND objid::bigint = pg_backend_pid() AND objsubid = 2)`
	probeUnlockSQL = `SELECT pg_advisory_unlock(1650817140, pg_backend_pid())`
)
