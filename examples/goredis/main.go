// Command goredis is the Go example of docs/clients.md: go-redis asking Sluice for decisions.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"
)

var addr = "localhost:6380" // where sluice listens

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr}) // go-redis v9 speaks RESP3: decisions are maps
	defer rdb.Close()

	// 100 requests a minute, bursts of up to 21, for this user.
	v, err := rdb.Do(ctx, "RL.GCRA", "user:42", 20, 100, "1m").Result()
	if err != nil {
		log.Fatal(err)
	}
	d := v.(map[any]any)
	if d["allowed"] == int64(1) {
		fmt.Printf("allowed: %d of %d left\n", d["remaining"], d["limit"])
	} else {
		fmt.Printf("limited: retry in %d ms\n", d["retry_after_ms"])
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
		fmt.Print(c.(*redis.Cmd).Val().(map[any]any)["allowed"], " ") // 1 1 0
	}
	fmt.Println()

	// redis-cell compatible: always an array.
	fmt.Println(rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60, 1).Int64Slice()) // [0 16 15 -1 2] <nil>
}
