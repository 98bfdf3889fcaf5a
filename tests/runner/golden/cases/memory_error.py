blocks = []
while True:
    blocks.append(bytearray(256 * 1024 * 1024))
