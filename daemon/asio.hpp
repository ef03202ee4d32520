#pragma once
// Boost 1.74's asio uses std::exchange in C++20 mode without including
// <utility> (awaitable.hpp); include it first, everywhere, through this file.
#include <utility>

#include <boost/asio.hpp>

namespace nodewatch {
namespace asio = boost::asio;
}
