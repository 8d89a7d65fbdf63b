// Package baseline holds what Sluice is measured against: the scripts an
// application without Sluice would write and call with EVALSHA, kept as
// small as such an application's, never Sluice's own.
package baseline

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
)

// Script is one baseline script and its EVALSHA digest.
type Script struct {
	Source, SHA string
}

var (
	//go:embed gcra.lua
	gcraSrc string
	//go:embed token.lua
	tokenSrc string
)

// GCRA is redis-cell's CL.THROTTLE as a script: GET, arithmetic, SET PX.
var GCRA = script(gcraSrc)

// Token is a token bucket in a hash: HMGET, HSET, PEXPIRE.
var Token = script(tokenSrc)

func script(src string) Script {
	sum := sha1.Sum([]byte(src))
	return Script{Source: src, SHA: hex.EncodeToString(sum[:])}
}
