// Package record keeps decision inputs in a file, so that a proposed
// configuration can be replayed against the traffic it would have met
// (package simulate, `sluice simulate`).
//
// A recording is JSON lines, one object a line, in version 2 of this
// format (Version). A line holding "sluice_recording" is a header: the
// format's version and how the lines after it were recorded (Header); the
// Writer starts every file with one, and writes another when MaxRate
// raises the sample. Its "sample" N says one key in N is recorded, with
// every decision of it (in version 1, one decision in N). Every other
// line is one decision (Entry):
//
//	t               µs since the Unix epoch: when the store decided (required;
//	                "time", an RFC 3339 string, may stand in for it)
//	door            resp, http or grpc: the door the request came through
//	policy          the policy it was decided by; absent for an inline limit
//	rule            an inline request's rule (a gateway's descriptor rule)
//	key | key_hash  the client's key, without the policy's prefix, or its
//	                hash (KeyHash) when keys are not recorded in the clear;
//	                one of the two is required
//	cost            units taken; absent means 1
//	peek, charge    the request only looked, or charged a cost known after the work
//	shadow          the policy ran in shadow mode (answered as allowed)
//	on_failure      allow, deny or local, when the request named one
//	limit           the limit decided by: algorithm, rate, period_us,
//	                burst, precision (required without a policy)
//	limits          a multi-limit policy's limits: the same, each with its name
//	allowed         whether the limits admitted it (before shadow mode) (required)
//	remaining       units left after it
//	retry_after_us  how long until it would be admitted, when refused
//	path            what decided: memory, redis, deny_cache, local_fallback,
//	                fail_open, fail_closed, grant
//
// Unknown fields are ignored, so that a later version may add some and a
// user's own log converter may keep its own.
//
// Writing is off the decision path: Record copies an entry into a page
// under a short lock and queues full pages for the writer's goroutine;
// when every page waits for the file the entry is dropped and counted,
// never waited for. The goroutine wakes a few milliseconds after an entry
// (linger) and writes every page then, so that decisions never pay to
// wake it and the file is written in large pieces; the hashes of hot keys
// and the policies' limits' JSON are kept from line to line. Lines are in
// the order entries were recorded. The file is bounded: past MaxSize it is
// rotated (FILE.1, FILE.2, … up to Keep). Keys are hashed with a salt
// unless asked for in the clear.
//
// A sample is of keys, not decisions: a limit decides by what its key
// asked before, so a replay reproduces a key's decisions only with all
// of them. Past MaxRate decisions a second the sample rises, never to
// fall while the Writer runs: a key leaves the sample, keeping the first
// part of its decisions, and none joins it late.
package record
