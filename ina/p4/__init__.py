"""The P4 switch: building the programs in p4src/ and controlling them on BMv2 (docs/p4.md).

Everything here but `toolchain` and `build` needs the optional `p4` extra
(`pip install 'ina[p4]'`: P4Runtime protobufs, gRPC, BMv2's Thrift client).
"""
