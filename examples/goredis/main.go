// Command goredis is the Go example of docs/clients.md: go-redis asking Sluice for decisions.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := os.Getenv("SLUICE_ADDR") // where sluice listens
	if addr == "" {
		addr = "localhost:6380"
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	// 100 requests a minute, bursts of up to 21, for this user. A decision
	// is an array, under go-redis v9's RESP3 as under RESP2:
	// allowed, limit, remaining, retry_after_ms, reset_after_ms.
	d, err := rdb.Do(ctx, "RL.GCRA", "user:42", 20, 100, "1m").Int64Slice()
	if err != nil {
		log.Fatal(err)
	}
	if d[0] == 1 {
		fmt.Printf("allowed: %d of %d left\n", d[2], d[1])
	} else {
		fmt.Printf("limited: retry in %d ms\n", d[3])
	}

	// Weighted and pipelined: three checks, one round trip.
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cost := range []int{5, 10, 10} {
			p.Do(ctx, "RL.TOKEN", "upload:42", 20, 10, "1s", cost)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range cmds {
		v, _ := c.(*redis.Cmd).Int64Slice()
		fmt.Print(v[0], " ") // 1 1 0
	}
	fmt.Println()

	// redis-cell compatible.
	fmt.Println(rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60, 1).Int64Slice()) // [0 16 15 -1 2] <nil>
}
