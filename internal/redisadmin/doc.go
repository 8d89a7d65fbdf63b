// Package redisadmin writes the text of Redis's administrative replies
// from plain values: a CLIENT LIST line, INFO's sections, COMMAND's
// entries and COMMAND DOCS, the CLIENT and COMMAND help,
// used_memory_human. It holds no connection, lock or
// counter: respserver gathers the values under its own rules (which
// goroutine may read what) and asks this package only how Redis 7 spells
// them, so that tools that parse those texts (redis-cli --stat, client
// libraries reading CLIENT LIST) keep working.
//
// It depends on no package of the project but the wire format's encoders
// (internal/resp).
package redisadmin
