// What the host benchmark and tests observe of the device layer: how many of
// its calls reached the driver (on the cpu device: the calls that would have),
// and a sink that takes launches instead of running them, so that the host's
// share of a launch can be timed without a kernel behind it.
#pragma once

#include <cstdint>

#include "mojo/device.hpp"

namespace mojo::device_hooks {

// Driver calls so far in this process, the launches not counted.
std::uint64_t driver_calls() noexcept;
void count_driver_call() noexcept;

// Called with each launch's arguments instead of the launch; nullptr (the
// default): launches run. For benchmarks and tests, set while no launch is in flight.
using LaunchSink = void (*)(const Function& f, Dim3 grid, Dim3 block, unsigned dynamic_smem, StreamHandle stream,
                            void** args, LaunchOptions options);
void set_launch_sink(LaunchSink sink) noexcept;

}  // namespace mojo::device_hooks
