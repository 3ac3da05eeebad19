// Umbrella header for RoPE: layouts, schedules, frequencies, exact angles, rotations, policies,
// and reading them from a Hugging Face config.json.
#pragma once

#include "lazyattn/rope/angle.hpp"
#include "lazyattn/rope/config.hpp"
#include "lazyattn/rope/frequencies.hpp"
#include "lazyattn/rope/from_json.hpp"
#include "lazyattn/rope/policy.hpp"
#include "lazyattn/rope/rotate.hpp"
#include "lazyattn/rope/types.hpp"
