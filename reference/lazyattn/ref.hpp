// Umbrella header for the CPU reference: Method, the scalar reference and the Eigen reference
// (when Eigen is available: LAZYATTN_REF_HAS_EIGEN).
#pragma once

#include "lazyattn/ref/common.hpp"
#include "lazyattn/ref/eigen.hpp"
#include "lazyattn/ref/scalar.hpp"
