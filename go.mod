module github.com/sluice-rl/sluice

go 1.26.8

require github.com/hashicorp/golang-lru/v2 v2.0.7
