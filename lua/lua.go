// Package lua holds Sluice's Redis scripts: the six rate-limiting algorithms
// in Lua, and envoyproxy/ratelimit's window in its own keys (peer.lua), each a table of functions that decides one request against one
// key, composed into one batch script that decides a whole batch of
// requests with any algorithms in one call; and the concurrency limiter's
// lease script.
//
// The scripts reproduce engine/algorithms.go decision by decision, in the
// same integer microseconds and with the same state (each file says how it
// keeps it in Redis). Each request touches exactly one key; every key written
// gets its TTL in the same script, when its state stops mattering, so no key
// lives forever and no crash can leave one without a TTL. The time is Redis's
// TIME, so sidecars with skewed clocks agree; a pinned time, an optional last
// argument, exists for tests only.
//
// Argument and reply layouts are documented at the top of batch.lua. The package imports nothing of the project:
// upstream maps engine's algorithms onto these scripts by their short names.
package lua

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"
)

// Script is one composed script, ready for EVALSHA.
type Script struct {
	// Name is "batch" or "lease".
	Name string
	// Source is the Lua text sent by EVAL and SCRIPT LOAD.
	Source string
	// SHA is the hex SHA-1 of Source: the EVALSHA digest.
	SHA string
}

// BatchFields is how many integers the batch script replies per request
// (per limit of a multi-limit request), before its error messages.
const BatchFields = 5

var (
	//go:embed prelude.lua
	preludeSrc string
	//go:embed bucket.lua
	bucketSrc string
	//go:embed batch.lua
	batchMain string

	//go:embed fixed.lua
	fixedSrc string
	//go:embed log.lua
	logSrc string
	//go:embed sliding.lua
	slidingSrc string
	//go:embed token.lua
	tokenSrc string
	//go:embed leaky.lua
	leakySrc string
	//go:embed gcra.lua
	gcraSrc string
	//go:embed peer.lua
	peerSrc string

	//go:embed lease.lua
	leaseMain string
)

// algorithms lists each algorithm's short name (also the name of its Lua
// function) and source, in engine's order.
var algorithms = []struct{ name, src string }{
	{"fixed", fixedSrc},
	{"log", logSrc},
	{"sliding", slidingSrc},
	{"token", tokenSrc},
	{"leaky", leakySrc},
	{"gcra", gcraSrc},
	{"peer", peerSrc},
}

// The scripts, composed once.
// prelude is what every script starts with: the shared helpers, and the
// bucket algorithm that three of the six are.
var prelude = preludeSrc + "\n" + bucketSrc

var (
	// Batch decides many requests, each with its own algorithm.
	Batch *Script
	// BatchLibrary is Batch as a Redis 7 function library, for FUNCTION
	// LOAD and FCALL.
	BatchLibrary *Library
	// Lease acquires and releases the concurrency limiter's leases of one
	// key (see lease.lua for its arguments and replies).
	Lease *Script
)

// shebang declares the scripts to Redis 7 as Lua with no flags: scripts that
// write. Redis then refuses a whole call up front, with the usual error
// (READONLY on a replica, OOM past maxmemory), rather than letting each
// write fail inside it, where the batch script's pcall would take a server
// that cannot serve for one bad request.
const shebang = "#!lua\n"

// batchShebang is shebang with the flag allow-cross-slot-keys (Redis 7):
// on Cluster one batch call reaches the keys of every slot its node
// serves, declared in ARGV rather than KEYS (see batch.lua). Outside a
// cluster the flag changes nothing.
const batchShebang = "#!lua flags=allow-cross-slot-keys\n"

// loader wraps an algorithm's source in a function that defines it and
// returns it: load_fixed, load_gcra, … A script's body runs on every call,
// and defining every algorithm's functions and tables cost Redis about
// 8 µs a call; a batch that uses one algorithm now defines one.
func loader(name, src string) string {
	return "local function load_" + name + "()\n" + src + "\nreturn " + name + "\nend\n"
}

// loaders is every algorithm's loader, the table of them by short name
// (loaders), and algorithms, where batch.lua keeps each one it loaded. In
// a library algorithms lives on between calls, as the functions do: an
// algorithm is defined at a library's first call that names it, not at
// every call (about 2 µs of Redis a call for GCRA). Its functions keep no
// state from one key to the next (their scratch tables are read into
// afresh for each key), so none from one call to the next either, but
// for a claim's memo, which holds only what is the same at every now
// (bucket.lua's claimOf).
func loaders() string {
	var code, names string
	for _, a := range algorithms {
		code += "\n" + loader(a.name, a.src)
		names += a.name + " = load_" + a.name + ", "
	}
	return code + "local loaders = {" + strings.TrimSuffix(names, ", ") + "}\nlocal algorithms = {}\n"
}

func init() {
	// batch.lua's call takes the keys and arguments: a script's are
	// globals, which its own locals of the same names hide.
	Batch = newScript("batch", batchShebang+"local scriptKeys, scriptArgs = KEYS, ARGV\n"+prelude+loaders()+"\n"+batchMain+"\nreturn call(scriptKeys, scriptArgs)\n")
	BatchLibrary = newLibrary()
	// The lease script needs the shared helpers, not the algorithms.
	Lease = newScript("lease", shebang+preludeSrc+"\n"+leaseMain)
}

func newScript(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{Name: name, Source: src, SHA: hex.EncodeToString(sum[:])}
}

// Library is the batch script as a function library: Redis runs its top
// level (the helpers' and algorithms' definitions) once, at FUNCTION LOAD,
// where a script runs it again on every EVALSHA.
//
// Function names are global to a Redis, so both names carry a hash of
// the library's code: two versions of Sluice during a rolling update load
// two libraries side by side, each calling its own. Libraries persist
// (RDB, AOF) and replicate like data; nothing deletes one that no sidecar
// calls any more (see the README's "Operating").
type Library struct {
	// Name is the library's, sluice_<hex>.
	Name string
	// Function is the batch function's, sluice_batch_<hex>: FCALL's
	// first argument, with Batch's keys and arguments after it.
	Function string
	// Source is FUNCTION LOAD's argument.
	Source string
}

// newLibrary defines batch.lua's functions once, and registers its call
// as the function, with the flag allow-cross-slot-keys (see
// batchShebang). call sets every local a call reads before reading it
// (begin, in prelude.lua, the prelude's), so that no call inherits the
// state of the call before it.
//
// Redis loads a library in a sandbox without math or string, so the
// definitions run at the first FCALL rather than at FUNCTION LOAD, in
// define, and once.
func newLibrary() *Library {
	code := "local batch\nlocal function define()\n" + prelude + loaders()
	code += "\n" + batchMain + "\nbatch = call\nend\n"
	sum := sha1.Sum([]byte(code))
	hash := hex.EncodeToString(sum[:8])
	l := &Library{Name: "sluice_" + hash, Function: "sluice_batch_" + hash}
	l.Source = "#!lua name=" + l.Name + "\n" + code +
		"redis.register_function{function_name='" + l.Function + "', flags={'allow-cross-slot-keys'}, callback=function(keys, args)\n" +
		"  if not batch then define() end\n  return batch(keys, args)\nend}\n"
	return l
}
