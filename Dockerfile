# opgate in a container: the Debian package built in a build stage and
# installed with apt on debian:12-slim, so the image holds what an installed
# machine holds (user opgate, /etc/opgate, /var/lib/opgate 0700).
# Untested: Docker does not run on the machines this project is built and
# tested on; only tests/package/check_dockerfile.sh reads this file.
#
#   docker build -t opgate .
#   docker run -d --name opgate -p 127.0.0.1:8080:8080 -p 127.0.0.1:8081:8081 \
#     --env-file opgate.env -v opgate-data:/var/lib/opgate opgate
#
# Secrets come from the environment (the variables named in opgate.env);
# mount your own config over /etc/opgate/opgate.toml to add operator tokens.

FROM debian:12-slim AS build
# The build dependencies (scripts/lib/common.sh OPGATE_PACKAGES), git for
# the revision, dpkg-dev and file for the package's library dependencies.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git dpkg-dev file \
      libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev \
      librocksdb-dev libprotobuf-dev protobuf-compiler \
      libssl-dev libfmt-dev libspdlog-dev libtoml11-dev libcli11-dev doctest-dev \
      libsystemd-dev libcbor-dev libpq-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Only the two executables: packing does not build the tests first.
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON \
 && cmake --build /build --target opgate opgate-sim \
 && cd /build && cpack -G DEB && cp /build/opgate_*.deb /tmp/opgate.deb

FROM debian:12-slim
COPY --from=build /tmp/opgate.deb /tmp/opgate.deb
# The package brings the runtime libraries, the user and the directories. In
# a container both listeners bind the container's own addresses; publish the
# operator API (8081) only to where your operators are.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/opgate.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/opgate.deb \
 && sed -i 's/^listen = "127\.0\.0\.1:\(808[01]\)"$/listen = "0.0.0.0:\1"/' /etc/opgate/opgate.toml
USER opgate
EXPOSE 8080 8081
VOLUME /var/lib/opgate
ENTRYPOINT ["/usr/bin/opgate"]
CMD ["serve", "--config", "/etc/opgate/opgate.toml"]
